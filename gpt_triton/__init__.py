"""gpt-triton: a Global Performance Tuner for Triton Inference Server.

Data flows one way, one module (or small package) per stage:
model (model_info) -> routes (routes/, search) -> built candidates (build) -> deployed in Triton
(server/, deploy/) -> measured (measure/) + validated (accuracy/) -> selected (select) -> promoted
(promote/, canary/) -> metrics (metrics/) and reports (report/).
"""

__version__ = "0.1.0"
