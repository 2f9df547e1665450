import sys

from lengthlens.cli import console_main

sys.exit(console_main())
