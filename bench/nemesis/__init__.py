"""The nemesis run (issue 27): a replicated cluster under a set workload, faults in seeded rounds, and a checker.

`plan` (which nemeses each round applies, from the seed alone), `workload` (writers through the
gateway keeping every answer), `faults` (applying and healing a nemesis on the cluster), `checker`
(the verdict over what was answered and what is stored), `run` (the rounds, one after another).
"""
