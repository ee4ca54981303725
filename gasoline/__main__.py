"""C{python -m gasoline}: the C{gasoline} console script (L{gasoline.cli})."""

from gasoline.cli import main

raise SystemExit(main())
