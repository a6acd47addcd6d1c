"""A loaded config's cross-field rules, one module per topic; `config.check_config` runs
them all, `environment.check_environment` lists what this machine lacks for a config."""
