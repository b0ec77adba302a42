import keras
import numpy as np
import pytest

from tpujob_trainer.config import ConfigError
from tpujob_trainer.models import build_model, resolve_builder


@pytest.mark.parametrize(("name", "shape"), [("digits-cnn", (8, 8, 1)), ("resnet-small", (32, 32, 3))])
def test_built_in_models_output_one_score_per_class(name: str, shape: tuple[int, int, int]) -> None:
    model = build_model(name, shape, 10, learning_rate=1e-3)
    assert model.output_shape == (None, 10)
    assert model.compiled and model.optimizer.built


def test_built_in_names_take_underscores() -> None:
    assert resolve_builder("digits_cnn") is resolve_builder("digits-cnn")


def test_a_user_model_is_compiled_when_it_comes_back_uncompiled() -> None:
    model = build_model("tests.trainer.user_code:build", (4, 4, 1), 2, learning_rate=1e-3)
    assert isinstance(model, keras.Model) and model.compiled


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("vgg", "'vgg' is not a built-in model (digits-cnn, resnet-small, sequence-cnn)"),
        ("no_such_module_xyz:build", "cannot import 'no_such_module_xyz'"),
        ("tests.trainer.user_code:missing", "has no function 'missing'"),
    ],
)
def test_unknown_models_say_what_exists(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        resolve_builder(spec)
    assert message in str(error.value)


def test_the_sequence_model_takes_any_length_and_ignores_padding() -> None:
    model = build_model("sequence-cnn", (None,), 4, learning_rate=1e-3)
    assert model.output_shape == (None, 4)
    tokens = np.random.default_rng(0).integers(1, 64, size=(2, 11)).astype(np.int32)
    padded = np.pad(tokens, [[0, 0], [0, 21]])  # token 0 is padding
    np.testing.assert_allclose(model(tokens), model(padded), atol=1e-6)
