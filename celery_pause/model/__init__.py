"""The model: pure values and rules of a pause, with no I/O and no Celery worker.

Scopes and their dimensions (:mod:`.scope`), holds and the state (:mod:`.state`), ramped
resumes (:mod:`.ramp`), maintenance windows and their recurrence (:mod:`.windows`,
:mod:`.recurrence`), the lifting rules of a resume (:mod:`.lifting`), a worker's report
(:mod:`.report`), every input check (:mod:`.validation`) and how values read
(:mod:`.formatting`, :mod:`.jsonfields`). It imports nothing of the package but its errors.
"""
