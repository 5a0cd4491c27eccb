import sys

from graphcheck.cli import main

sys.exit(main())
