"""The memory path: the durable outbox, its delivery link, the IN:MEMORY relay, the embedded
sink and the reference Memory Specialist (``sink``)."""
