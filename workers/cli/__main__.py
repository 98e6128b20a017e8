import sys

from workers.cli.command_line import main

sys.exit(main())
