"""Converters from other frameworks' configs to flywheel's. A leaf: only the CLI's path
(`flywheel.pipelines.config`, `flywheel.cli`) imports it."""
