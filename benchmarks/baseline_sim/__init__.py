"""A frozen copy of the simulator before the speed-ups of issue 12 item 1 (explorer/simulate.py and
explorer/costs/{gemm,comm,attention}.py as they were), kept only so that
``benchmarks/bench_simulator.py`` measures today's code against it in the same run.  Not used by
the explorer; tests/test_speed_equivalence.py checks that both agree with tests/data/speed_reference.npz."""
