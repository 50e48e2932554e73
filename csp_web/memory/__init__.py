"""The memory path: the durable outbox, its delivery link and the IN:MEMORY relay. The
reference Memory Specialist is a program of its own (``csp_web.sink``); the composition root
chooses between it embedded and a configured one (``csp_web.app.memory_path``)."""
