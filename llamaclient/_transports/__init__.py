"""The HTTP stacks behind one small interface (``base.py``): our own HTTP/1.1 on asyncio
(``native.py``) and httpx (``httpx.py``), and the choice between them."""
