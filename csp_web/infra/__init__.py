"""Infrastructure only specialists use: the two-tier cache and the token-bucket rate limits."""
