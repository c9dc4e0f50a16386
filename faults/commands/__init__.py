"""The ``kvfault`` subcommands behind ``kvfault.faults.cli``: each module takes the parsed
arguments of one command, runs it and renders what came back (``run``, ``listing``,
``repro`` for repro and replay, ``sweep``); ``prove`` is ``kvfault.faults.prove.run``."""
