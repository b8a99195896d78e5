"""File access that never follows a path the user chose: who may read what, and the reader.

- `policy`: which folders a user may name as a job's `directory` and read (the job folders
  the gateway made for them, the roots their profile grants), decided lexically;
- `reader`: the no-follow reader (self-contained; run in-process or on the login node);
- `access`: the gateway's side: place a path, run the reader as the right account, decode.

A security reviewer can read these three modules alone; `docs/security-model.md` says why.
"""
