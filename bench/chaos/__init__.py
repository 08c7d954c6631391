"""The chaos run (issue 10): mixed load under kill -9, and an account of every answered send.

`run` drives it; `load` (producers, consumers), `killer` (the seeded kill schedule),
`ledger` (what was answered, delivered, killed, and the verdict), `patient` (a
client that outlasts a dead gateway), `checkback` (the producers' check-back receiver).
"""
