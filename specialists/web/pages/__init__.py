"""Pages: loading a URL (the guard, the cache, flights across the daemon and the fleet, the
loaders: direct and Firecrawl), fileKey snapshots, and the ops that read pages: fetch, api,
summarize."""
