from heron.cli import main

raise SystemExit(main())
