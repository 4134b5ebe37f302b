"""Recurrent cells (declarations: see ops/declare.py): one time step of an LSTM or a GRU,
PyTorch's formulas and gate order (kernels/recurrent.cl, which the Net's recurrent layers
run over whole sequences)."""
from .declare import declare

FAMILY = "recurrent"

declare("lstm_cell", FAMILY, "launcher",
        "one LSTM step from its gate products: i, f, g, o; c = f c_prev + i g, h = o tanh(c)",
        dtypes=("float",), aten=("_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl"),
        layer="LSTM", launch="dlprim.torch.ops_rnn_cells")
declare("gru_cell", FAMILY, "launcher",
        "one GRU step from its gate products: r, z; n = tanh(x_n + r h_n), "
        "h = (1 - z) n + z h_prev",
        dtypes=("float",), aten=("_thnn_fused_gru_cell", "_thnn_fused_gru_cell_backward"),
        layer="GRU", launch="dlprim.torch.ops_rnn_cells")
