from agentsearch.cli import main

raise SystemExit(main())
