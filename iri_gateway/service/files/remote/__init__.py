"""What runs where the files are, never in the serving process: the programs the gateway
sends (`shipping`) to a login node, or runs with its own interpreter on this machine.

- `reader`: resolve a path once, without following links out, and read, list or stat it;
  the shared no-follow primitives the others build on (`checked_name`, `split_path`,
  `lstat_at`, `read_at`, `entry_of`, `LinkMet`, `Names`, `Refused`, `Area`, `Walker`);
- `writer`: change files the same way (mkdir, rm, mv, cp, chmod, chown, symlink, checksum,
  file type); shares `DIRECTORY`, `NEW_FILE`, `identity`, `must_exist`, `must_be_absent`,
  `os_refusal`, `Budget`, `Place` with the archiver;
- `tarheaders`: the raw tar header scanner (bounds before `tarfile` sees an archive);
- `archiver`: compress and extract, and the file agent's entry (`main`);
- `supervisor`: the file agent's watchdog (a worker per request, limits, cancel, progress);
- `transfer_agent`: uploads and downloads, streamed.

Every module here uses the standard library and its siblings only, by their public names
(a sibling's private name is its own business), and runs on Python 3.9: a login node's
`python3` is what it is. The gateway's side of each is in the package above (`reads`,
`writes`, `transfers`, `agents`).
"""
