"""The one adapter loop between a byte stream and the dispatcher: reading frames, fair starts,
replies in request order, and what a shutdown tells a connection."""
