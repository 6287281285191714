"""The public vocabulary: messages, requests, config, events, the Completion and the error tree.

Plain frozen data; no I/O."""
