"""The core layer: records every stage shares (model, routes, candidates, measurements, accuracy
verdicts, the spec, errors), the objective, and the table of a candidate's allowed status changes.

Nothing here imports a stage package; every stage may import from here.
"""
