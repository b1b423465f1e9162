"""Reading llama.cpp's output: one pattern table of its line shapes (:mod:`.patterns`), one
classifier from a line to a typed event (:mod:`.classify`, :mod:`.events`), and two folds
over the events: the memory facts (:mod:`.memory`) and the server's state (:mod:`.server`),
read together by :class:`~.reader.LogReader`; a router's log (:mod:`.router`) and a log shown
to a person (:mod:`.repeats`) on top."""
