"""The CSP/1 clients: trio's (``trio_client``) and asyncio's (``aio_client``), many concurrent
calls over one connection, each reply matched to its caller by one sans-IO piece
(``matcher``)."""
