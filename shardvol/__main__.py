"""``python -m shardvol``: the ``shardvol`` command."""

from shardvol.cli import main

raise SystemExit(main())
