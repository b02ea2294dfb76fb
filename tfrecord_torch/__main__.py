"""``python -m tfrecord_torch``: the ``tfrecord-torch`` command line."""

import sys

from tfrecord_torch.cli import main

sys.exit(main())
