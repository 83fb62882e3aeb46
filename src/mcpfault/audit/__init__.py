"""``mcpfault audit``: is each tool of a server safe to retry, and do its annotations tell the truth?"""
