"""Research jobs: search, read the sources, write a cited report in the background (research,
result)."""
