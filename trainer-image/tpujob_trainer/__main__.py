import sys

from tpujob_trainer.cli import main

sys.exit(main())
