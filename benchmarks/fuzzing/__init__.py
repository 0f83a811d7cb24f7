"""Fuzzing harness for vramwise (issue 10): generators, the oracle and a sandboxed runner.

Shared by ``tests/unit/project/test_fuzz.py`` (hypothesis, CI profile), ``tests/unit/project/test_fuzz_corpus.py`` (regression
replay) and ``benchmarks/fuzz.py`` (the long campaign).

Design
------
Every target has one *generator* ``gen_<target>(r)`` that draws a case from ``r``, any object with
``random()``, ``randint(a, b)`` and ``choice(seq)``:

* the campaign passes ``random.Random(f"{seed}:{target}:{index}")``, so case ``index`` of a target is
  the same on every machine and run (resumable, reproducible, no hypothesis overhead);
* the hypothesis suite passes ``st.randoms(use_true_random=False)``, whose draws hypothesis records
  and shrinks (choice lists are ordered simplest first, so shrinking moves toward plain inputs).

A case is plain data (JSON with tags for NaN/inf, bytes and tuples, see :mod:`.codec`) holding the
*materialised* input: the mutated config, the argv and file specs, the mutated data-file text. It is
run by :func:`.targets.run_case` inside a forked worker (:mod:`.sandbox`) with an address-space limit
and a wall-clock kill, and judged by :mod:`.oracle`:

* ``ok``       a sane result (every component, phase and figure an int >= 0, total an int > 0, ...);
* ``error``    an exception from the documented tree (``vramwise.VramwiseError`` and subclasses), or
  for the CLI an exit status of 0 or 2;
* ``finding``  anything else: a foreign exception, an insane value, a case over 1 s of CPU, over
  200 MB of extra resident memory, killed on the wall-clock limit or a dead worker.
"""

from .codec import decode, encode, dumps, loads, short_hash  # noqa: F401
from .oracle import Outcome, TIME_LIMIT_S, MEMORY_LIMIT_MB  # noqa: F401
from .generators import GENERATORS, TARGETS  # noqa: F401
from .sandbox import Sandbox  # noqa: F401
