import sys

from torchpace.cli import main

sys.exit(main())
