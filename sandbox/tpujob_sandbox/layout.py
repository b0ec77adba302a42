"""Files in a sandbox's state folder that more than one part reads (a light module: `up`/`down` import it)."""

INFO_FILE = (
    "sandbox.json"  # {"kubeconfig", "gkeEndpoint", "project", "location", "cluster", "pid", "pids", "logs"}
)
DAEMON_LOG = "sandbox.log"
