"""The stand-in library: every program that plays a real one the tests cannot have, and the
Python they share (README.md says which, and why each is a stand-in).

It is a package only so that the Python stand-ins (`ssh_standin`) can be imported; the
programs beside it are run by path, never imported.
"""
