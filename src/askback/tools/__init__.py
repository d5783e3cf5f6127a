"""Developer tools that read and probe MCP servers: `lint` (static checks of handler code) and `check` (a live
probe of a running server against the 2026-07-28 rules). They import only the core, never the server stack."""
