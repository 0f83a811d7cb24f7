import sys

from vramwise.surfaces.cli.main import main

sys.exit(main())
