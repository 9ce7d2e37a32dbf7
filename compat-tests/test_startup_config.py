"""What a real broker process says at start-up about its configuration."""

WITHOUT_EFFECT = "These settings are accepted for compatibility but have no effect in kafkacompat: "


def test_settings_without_effect_are_named_in_one_start_up_warning(broker_factory):
    broker = broker_factory("--set", "num.io.threads=16", "--set", "num.partitions=2",
                            "--set", "log.cleaner.io.buffer.size=1048576")
    [line] = [line for line in broker.output().splitlines() if WITHOUT_EFFECT in line]
    assert line.endswith(WITHOUT_EFFECT + "log.cleaner.io.buffer.size=1048576, num.io.threads=16")
    assert " WARNING kafkacompat.config: " in line


def test_a_default_configuration_starts_without_that_warning(broker):
    assert WITHOUT_EFFECT not in broker.output()
