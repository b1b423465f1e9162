"""One launch pipeline for ``lltui launch`` and the launch view.

- :mod:`.request`: what a front end was given, read into the launch it asks for;
- :mod:`.session`: the one base of a server and a router (prepare, start, stop, close), and
  one server's session; :mod:`.router` and :mod:`.router_prep`: a router's;
- :mod:`.check`: fit's verdict on a command before it starts; :mod:`.compare`: a loaded
  server's buffers beside the prediction; :mod:`.speed`: served requests beside it;
- :mod:`.state`: the one frozen launch state, and the monitor's alert of it;
- :mod:`.watch`: the one watch that folds the supervisor, :mod:`.polls` (HTTP) and the speed
  checks into that state; :mod:`.controller`: the launch view's actions on it.
"""
