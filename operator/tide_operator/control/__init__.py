"""Pure decision logic: no kopf, no client, no network."""
