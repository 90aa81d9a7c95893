"""What the HTTP API (:mod:`simpleworkflow.server`) and the web dashboard
(:mod:`simpleworkflow.dashboard`) share: tokens (:mod:`.auth`), the client they act
through (:mod:`.source`), errors as problem details (:mod:`.problems`), routes that parse
and limit bodies (:mod:`.routing`), the allowed hosts and origins (:mod:`.origins`) and
the guard in front of every request (:mod:`.guard`).

Needs the ``server`` extra. Both faces import this package, and it imports neither: the
app that serves them together is :func:`simpleworkflow.server.create_app`.
"""
