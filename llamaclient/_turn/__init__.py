"""One chat turn as a pure state machine (``ChatTurn``): inputs go in, events and the next
command come out. No I/O, no clock, no event loop: the driver (``_stream.py``) performs each
command and feeds the result back."""
