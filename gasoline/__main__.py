from gasoline.cli import main

raise SystemExit(main())
