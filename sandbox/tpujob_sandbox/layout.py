"""Files in a sandbox's state folder that more than one part reads (a light module: `up`/`down` import it)."""

# {"kubeconfig", "gkeEndpoint", "project", "location", "cluster", "zone", "releaseChannel", "timeScale",
#  "pid", "pids", "logs"}
INFO_FILE = "sandbox.json"
DAEMON_LOG = "sandbox.log"
