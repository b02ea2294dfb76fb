import sys

from tfrecord_torch.cli import main

sys.exit(main())
