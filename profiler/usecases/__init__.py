"""Use cases (usecases layer): one function per thing a user asks for, composing inputs, analyzers and renderers.

A CLI verb parses its options, calls one use case and prints what it returns; the use case holds
no option parsing and no terminal output.
"""
