"""The llamaclient benchmark suite: ``python -m bench`` (or ``nox -s bench``).

Every client is measured side by side in the same run, on loopback, against a fake
llama-server in separate processes (:mod:`bench.fake_server`) that writes realistic chunks
(:mod:`bench.chunks`). The contenders are in :mod:`bench.contenders`, the scenarios in
:mod:`bench.scenarios`, the table and the targets in :mod:`bench.report`.
"""
