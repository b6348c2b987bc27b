"""Conformance suites shipped with the package: one class per abstract base, which every
implementation's test subclasses (pytest collects the inherited test methods)."""
