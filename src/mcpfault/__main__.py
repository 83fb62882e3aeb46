from mcpfault.cli import main

raise SystemExit(main())
