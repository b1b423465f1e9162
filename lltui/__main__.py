import sys

from lltui.cli import main

sys.exit(main())
