"""Checks tests (and the soak and benchmarks) make at their end: the database invariants
(`invariants`), every row of some tables to prove a refused call wrote nothing
(`snapshots`), exact statement counts per operation (`statements`), and how long an event
loop stood still (`loop_stall`).
"""
