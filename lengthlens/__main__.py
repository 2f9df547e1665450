import sys

from lengthlens.cli import main

sys.exit(main())
