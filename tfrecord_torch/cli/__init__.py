"""The ``tfrecord-torch`` command line. Light commands (index, verify,
inspect, head, cat) import neither torch nor torchvision."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    from tfrecord_torch.cli.parser import main as run

    return run(argv)
