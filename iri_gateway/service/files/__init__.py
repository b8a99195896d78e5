"""File access that never follows a path the user chose, in two halves.

The gateway's side (here): which folders a user may name and read (`policy`: the job folders
the gateway made for them, the roots their profile grants, decided lexically); reads
(`reads`), changes (`writes`) and uploads and downloads (`transfers`): place the path, ask
the program where the files are, turn its answer into results or one refusal type
(`refusals`); the file agents that run those programs with limits (`agents`), and the one
packer that sends them (`shipping`).

What runs where the files are (`remote`): the no-follow reader, the writer, the archiver, the
agent's supervisor and the transfer agent, self-contained, never run in the serving process.

A security reviewer can read `policy`, `reads` and `remote.reader` alone;
`docs/security-model.md` says why.
"""
