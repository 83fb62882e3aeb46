"""Pure functions over recorded data: join attempts with proxy events, judge each task, aggregate."""
