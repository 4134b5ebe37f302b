"""The base class keeps the layer contract: setup records the input specs and checks what
``build`` returns; flags come back with the output specs, never from instance attributes."""
import pytest

from dlprim.layers import Layer, LayerError, LayerFlags, ParamSpec, Setup, TensorSpec


class Twice(Layer):
    """A layer that needs no device: y has x's shape, one parameter, some workspace."""
    type_name = "Twice"
    INPLACE = True
    BACKWARD_READS_INPUTS = False

    def build(self, in_specs):
        spec = self.single_input(in_specs)
        return Setup([spec], [(spec.shape[-1:], "float32")], 64 * spec.shape[0],
                     saved=[(spec.shape, "int32")])


def test_setup_records_inputs_and_normalises_the_answer():
    layer = Twice(None, name="t")
    result = layer.setup([TensorSpec((3, 5))])
    assert layer.in_specs == [TensorSpec((3, 5))]
    assert result.outputs == [TensorSpec((3, 5))]
    assert result.params == [ParamSpec((5,))] and result.workspace == 192
    assert result.saved == [TensorSpec((3, 5), "int32")]
    # the class attributes are the default flags, and layer.flags what setup returned
    assert result.flags == LayerFlags(backward_reads_inputs=False, inplace=True)
    assert layer.flags is result.flags
    assert layer.reshape([(7, 5)]) == ([(7, 5)], 448)
    assert layer.in_specs == [TensorSpec((7, 5))]


def test_default_flags_take_changes():
    assert Twice.default_flags(inplace=False) == LayerFlags(False, False, False, True)
    with pytest.raises(TypeError):
        Twice.default_flags(in_place=False)


@pytest.mark.parametrize("method", ["setup", "reshape"])
def test_overriding_the_template_is_refused(method):
    with pytest.raises(TypeError, match="Sneaky overrides Layer.%s.*build" % method):
        type("Sneaky", (Layer,), {method: lambda self, specs: None})


def test_build_must_return_a_setup():
    class Old(Layer):
        type_name = "Old"

        def build(self, in_specs):
            return list(in_specs), [], 0

    with pytest.raises(TypeError, match="Old 'o': build\\(\\) must return a Setup"):
        Old(None, name="o").setup([TensorSpec((2,))])


def test_flags_on_the_instance_are_refused():
    layer = Twice(None, name="t")
    layer.INPLACE = False
    with pytest.raises(TypeError, match="Twice 't' sets INPLACE on the instance"):
        layer.setup([TensorSpec((2, 2))])


def test_bad_answers_name_the_layer():
    class Bad(Layer):
        type_name = "Bad"

        def build(self, in_specs):
            return Setup(list(in_specs), workspace=-1)

    with pytest.raises(LayerError, match="Bad 'b': .*negative workspace"):
        Bad(None, name="b").setup([TensorSpec((2,))])
    with pytest.raises(LayerError, match="Bad 'b': reshape needs a setup"):
        Bad(None, name="b").reshape([(2,)])
