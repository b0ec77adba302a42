"""`python -m tpujob_sandbox.binaries`: build (once) or show the cached control plane binaries."""

from tpujob_sandbox.binaries import find_binaries

found = find_binaries()
print(f"{found.origin}: {found.folder}; CRD server: {found.crd_server}")
