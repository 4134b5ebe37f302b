"""DLPrimitives' Python examples, call for call, against dlprim.

Each test transcribes one script of DLPrimitives' sources (python/test.py,
python/predict_mnist.py, examples/python/mnist/train_mnist.py,
examples/python/tiny_imagenet/train_tiny_imagenet.py, tools/validate_onnx_imagenet.py):
the same calls in the same order, on tiny generated nets, images and ONNX files instead
of MNIST, Tiny ImageNet and torchvision models. Results are checked against PyTorch's
functional ops or onnxruntime.
"""
import numpy as np
import pytest

import dlprim as dp
from dlprim.net.weights import load as load_weights

torch = pytest.importorskip("torch", reason="PyTorch (test extra) is the reference")
F = torch.nn.functional

SIDE = 8  # the examples' 28x28 MNIST digits, shrunk


# ----- examples/python/mnist/train_mnist.py: the net, data, train() and test()
def make_net(batch, deploy):
    n = dp.NetConfig()
    n.add_input('data', (batch, 1, SIDE, SIDE))
    n.add('Convolution2D', inputs='data', options=dict(channels_out=4, kernel=5, pad=2, activation='relu'))
    n.add('Pooling2D', options=dict(kernel=2, stride=2))
    n.add('Convolution2D', options=dict(channels_out=8, kernel=5, pad=2, activation='relu'))
    n.add('Pooling2D', options=dict(kernel=2, stride=2))
    n.add('InnerProduct', options=dict(outputs=16, activation='relu'))
    n.add('InnerProduct', outputs="ip2", options=dict(outputs=10))
    n.add('Softmax', outputs='prob')
    if not deploy:
        n.add_input('label', (batch,))
        n.add('SoftmaxWithLoss', inputs=['ip2', 'label'], outputs='loss')
        n.set_outputs(['loss', "prob"])
    return n


def digits(count, seed):
    """Ten classes told apart by where a bright 2x2 block sits; labels as float32, as
    the example reads MNIST's."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 10, count)
    data = rng.uniform(0, 0.2, (count, 1, SIDE, SIDE)).astype(np.float32)
    for i, c in enumerate(label):
        r, col = 2 * (c // 4) + 1, 2 * (c % 4)
        data[i, 0, r:r + 2, col:col + 2] = 1.0
    return data, label.astype(np.float32)


def run_test(e, net, batch, data, labels):  # the example's test()
    net.mode = dp.PREDICT
    N = data.shape[0]
    total_loss = 0
    total_acc = 0
    count = 0
    for p in range(0, N, batch):
        d = data[p:p + batch]
        l = labels[p:p + batch]
        dtensor = net.tensor('data')
        ltensor = net.tensor('label')
        loss_tensor = net.tensor('loss')
        prob_tensor = net.tensor('prob')
        n = d.shape[0]
        if n != dtensor.shape[0]:
            dtensor.reshape(dp.Shape(*d.shape))
            ltensor.reshape(dp.Shape(*l.shape))
            net.reshape()
        dtensor.to_device(d, e)
        ltensor.to_device(l, e)
        net.forward(e)
        loss = np.zeros(1, dtype=np.float32)
        prob = np.zeros((n, 10), dtype=np.float32)
        loss_tensor.to_host(loss, e)
        prob_tensor.to_host(prob, e)
        total_loss += loss[0]
        total_acc += np.sum(np.argmax(prob, axis=1) == l)
        count += n
    return total_loss / count, total_acc / count


def train(e, net, opt, batch, data, labels):
    net.mode = dp.TRAIN
    N = data.shape[0]
    losses = []
    for p in range(0, N, batch):
        d = data[p:p + batch]
        l = labels[p:p + batch]
        dtensor = net.tensor('data')
        ltensor = net.tensor('label')
        loss_tensor = net.tensor('loss')
        prob_tensor = net.tensor('prob')
        n = d.shape[0]
        if n != dtensor.shape[0]:
            dtensor.reshape(dp.Shape(*d.shape))
            ltensor.reshape(dp.Shape(*l.shape))
            net.reshape()
        dtensor.to_device(d, e)
        ltensor.to_device(l, e)
        opt.step(net, e)
        loss = np.zeros(1, dtype=np.float32)
        prob = np.zeros((n, 10), dtype=np.float32)
        loss_tensor.to_host(loss, e)
        prob_tensor.to_host(prob, e)
        losses.append(loss[0])
    return losses


def reference_prob(params, x):
    """The deploy net in PyTorch's functional ops, with the weights of a .dlp file."""
    w = [torch.from_numpy(params[k]) for k in sorted(params)]   # conv0, conv2, ip4, ip5
    t = F.max_pool2d(F.relu(F.conv2d(torch.from_numpy(x), w[0], w[1], padding=2)), 2)
    t = F.max_pool2d(F.relu(F.conv2d(t, w[2], w[3], padding=2)), 2)
    t = F.relu(F.linear(t.flatten(1), w[4], w[5]))
    return F.softmax(F.linear(t, w[6], w[7]), dim=1).numpy()


@pytest.fixture(scope="module")
def trained(ctx, tmp_path_factory):
    """train_mnist.py's main(): train, test each epoch, save mnsit.dlp and mnist.json."""
    folder = tmp_path_factory.mktemp("mnist")
    tr_d, tr_l = digits(200, seed=0)
    ts_d, ts_l = digits(40, seed=1)
    batch = 16  # 200 = 12 batches of 16 and one of 8: the batch shrinks and grows back
    e = ctx.make_execution_context()
    n = make_net(batch, False)
    net = dp.Net(ctx)
    net.mode = dp.TRAIN
    net.load_from_json(n.to_str())
    net.setup()
    net.initialize_parameters(e)
    opt = dp.Adam(ctx)
    opt.init(net, e)
    history = []
    for epoch in range(22):
        losses = train(e, net, opt, batch, tr_d, tr_l)
        history.append((losses, run_test(e, net, batch, ts_d, ts_l)))
    net.save_parameters(str(folder / 'mnsit.dlp'))
    make_net(batch, True).save(str(folder / 'mnist.json'))
    return folder, history, ts_d, ts_l


def test_train_mnist_learns_the_task(trained):
    folder, history, _, _ = trained
    first_losses, (first_loss, first_acc) = history[0]
    last_losses, (last_loss, last_acc) = history[-1]
    assert np.all(np.isfinite(first_losses + last_losses))
    assert np.mean(last_losses) < 0.5 * np.mean(first_losses)
    assert last_acc >= 0.9 and last_acc > first_acc
    assert (folder / 'mnsit.dlp').exists() and (folder / 'mnist.json').exists()


def test_python_test_py(ctx, trained, monkeypatch):
    """python/test.py: a tensor round trip, then the saved net at batch 2."""
    folder, _, ts_d, _ = trained
    ctx = dp.Context(ctx.device_string)
    print(ctx.name)
    q = ctx.make_execution_context()
    t1 = dp.Tensor(ctx, dp.Shape(5, 10), dp.float32)
    assert tuple(t1.shape) == (5, 10) and t1.dtype == dp.float32
    a = np.random.randn(5, 10).astype(np.float32)
    b = np.zeros((5, 10), dtype=np.float32)
    t1.to_device(a, q)
    t1.to_host(b, q)
    np.testing.assert_array_equal(a, b)

    net = dp.Net(ctx)
    net.load_from_json_file(str(folder / 'mnist.json'))
    net.setup()
    net.load_parameters(str(folder / 'mnsit.dlp'), False)
    assert net.input_names == ['data'] and net.output_names == ['prob']
    data = net.tensor('data')
    data.reshape(dp.Shape(2, 1, SIDE, SIDE))
    net.reshape()
    x = ts_d[:2]
    data.to_device(x, q)
    net.forward(q, False)
    res = net.tensor(net.output_names[0])
    assert tuple(res.shape) == (2, 10)
    np_res = np.zeros((2, 10), dtype=np.float32)
    res.to_host(np_res, q)
    expected = reference_prob(load_weights(str(folder / 'mnsit.dlp')), x)
    np.testing.assert_allclose(np_res, expected, rtol=1e-4, atol=1e-5)


def test_predict_mnist_py(ctx, trained):
    """python/predict_mnist.py: batches of images through the deploy net, argmax each."""
    folder, _, ts_d, ts_l = trained
    q = ctx.make_execution_context()
    net = dp.Net(ctx)
    net.load_from_json_file(str(folder / 'mnist.json'))
    net.setup()
    net.load_parameters(str(folder / 'mnsit.dlp'), False)
    data = net.tensor('data')
    batch = data.shape[0]
    images = ts_d[:batch + 5]  # a full batch, then a partial one (rest of inp stays zero)
    inp = np.zeros((batch, 1, SIDE, SIDE), dtype=np.float32)
    scores = np.zeros((batch, 10), dtype=np.float32)

    def load_batch(index, batch, inp):
        chunk = images[index:index + batch]
        for i, img in enumerate(chunk):
            np.copyto(inp[i], img.reshape(1, SIDE, SIDE))
        return len(chunk)

    predicted = []
    for index in range(0, len(images), batch):
        n = load_batch(index, batch, inp)
        data.to_device(inp, q)
        net.forward(q, False)
        net.tensor('prob').to_host(scores, q)
        expected = reference_prob(load_weights(str(folder / 'mnsit.dlp')), inp)
        np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-5)
        predicted += [int(np.argmax(scores[k])) for k in range(n)]
    assert np.mean(np.array(predicted) == ts_l[:len(images)]) >= 0.9


# ----- examples/python/tiny_imagenet/train_tiny_imagenet.py
class TinyReader:
    """The example's TinyImageNetReader's interface over random uint8 images."""

    def __init__(self, classes=5, per_class=8, test=8, seed=0):
        rng = np.random.default_rng(seed)
        self._classes = classes
        self._train = [rng.integers(0, 256, (per_class, 3, SIDE, SIDE), dtype=np.uint8)
                       for _ in range(classes)]
        self._val = rng.integers(0, 256, (test, 3, SIDE, SIDE), dtype=np.uint8)
        self._val_labels = list(rng.integers(0, classes, test))
        self._rng = rng

    @property
    def img_size(self):
        return 3, SIDE, SIDE

    @property
    def classes(self):
        return self._classes

    @property
    def train_images(self):
        return np.sum([v.shape[0] for v in self._train])

    def fill_train_batch(self, batch, labels, random_mirror=True):
        for i in range(batch.shape[0]):
            cls = int(self._rng.integers(0, self._classes))
            labels[i] = cls
            img = self._train[cls][self._rng.integers(0, len(self._train[cls]))]
            if random_mirror and self._rng.integers(0, 2) == 1:
                img = img[:, :, ::-1]
            batch[i] = img.astype(np.float32) * (1 / 255)

    def test_data(self, batch_size):
        batch_data = np.zeros((batch_size, 3, SIDE, SIDE), dtype=np.float32)
        batch_labels = np.zeros((batch_size,), dtype=np.float32)
        for indx in range(0, self._val.shape[0], batch_size):
            end = min(indx + batch_size, self._val.shape[0])
            size = end - indx
            dt = batch_data[0:size]
            lb = batch_labels[0:size]
            dt[:] = self._val[indx:end].astype(np.float32) * (1 / 255.0)
            lb[:] = self._val_labels[indx:end]
            yield dt, lb


def add_conv_bn_relu(n, name, inp, kern, stride, features, relu):
    n.add('Convolution2D', inputs=inp, name=name + '_cnv', outputs=name + '_cnv',
          options=dict(channels_out=features, kernel=kern, pad=(kern - 1) // 2, stride=stride, bias=False))
    n.add('BatchNorm', name=name + '_bn', outputs=name + '_bn')
    if relu:
        n.add('Activation', inputs=name + '_bn', outputs=name + '_bn', options=dict(activation='relu'))
    return name + '_bn'


def add_resnet_block(n, name, inp, stride, features):
    if stride > 1:
        b0 = add_conv_bn_relu(n, name + "_b0", inp, 1, stride, features, relu=False)
    else:
        b0 = inp
    out = add_conv_bn_relu(n, name + "_b1a", inp, 3, stride, features=features, relu=True)
    out = add_conv_bn_relu(n, name + "_b1b", out, 1, stride=1, features=features, relu=False)
    n.add('Elementwise', name + '_elt', inputs=[b0, out], outputs=name + "_elt", options=dict(activation='relu'))
    return name + "_elt"


def make_resnet(batch, deploy, img_size, classes):
    n = dp.NetConfig()
    n.add_input('data', (batch, *img_size))
    n.add('Convolution2D', name='conv0', inputs='data', options=dict(channels_out=8, kernel=5, pad=2, bias=False))
    n.add('BatchNorm', name='bn0', outputs='bn0')
    n.add('Activation', name='act0', outputs='bn0', options=dict(activation='relu'))
    n.add('Pooling2D', name='pool0', outputs='pool0', options=dict(kernel=3, stride=2, pad=1))
    out = 'pool0'
    for i, N in enumerate([16]):  # the example's [128, 256, 512]
        out = add_resnet_block(n, 'res_%d_0' % i, out, stride=1, features=N // 2)
        out = add_resnet_block(n, 'res_%d_2' % i, out, stride=2, features=N)
    n.add('GlobalPooling', name='gp', outputs='gp', inputs=out, options=dict(mode='avg'))
    n.add('InnerProduct', outputs="ip", options=dict(outputs=classes))
    n.add('Softmax', outputs='prob')
    if not deploy:
        n.add_input('label', (batch,))
        n.add('SoftmaxWithLoss', inputs=['ip', 'label'], outputs='loss')
        n.set_outputs(['loss', "prob"])
    return n


def test_tiny_imagenet(ctx, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    reader = TinyReader()
    batch = 4
    e = ctx.make_execution_context()
    n = make_resnet(batch, False, reader.img_size, reader.classes)
    net = dp.Net(ctx)
    net.mode = dp.TRAIN
    net.load_from_json(n.to_str())
    with open('train.js', 'w') as f:
        f.write(n.to_str())
        f.write('\n')
    net.setup()
    net.initialize_parameters(e)
    ops = n.to_json()['operators']
    shapes = {}
    for op in ops:
        for name in op['inputs'] + op['outputs']:
            shapes[name] = net.tensor(name).shape
    assert tuple(shapes['pool0']) == (batch, 8, SIDE // 2, SIDE // 2)
    assert tuple(shapes['res_0_2_elt']) == (batch, 16, SIDE // 4, SIDE // 4)
    assert tuple(shapes['gp']) == (batch, 16, 1, 1)
    opt = dp.Adam(ctx)
    opt.init(net, e)

    # train(): the next batch is prepared while the device runs the step
    epoch_size = (reader.train_images + batch - 1) // batch
    net.mode = dp.TRAIN
    dtensor, ltensor = net.tensor('data'), net.tensor('label')
    loss_tensor, prob_tensor = net.tensor('loss'), net.tensor('prob')
    d = np.zeros((batch, *reader.img_size), dtype=np.float32)
    l = np.zeros(batch, dtype=np.float32)
    loss = np.zeros(1, dtype=np.float32)
    prob = np.zeros((batch, reader.classes), dtype=np.float32)
    reader.fill_train_batch(d, l, True)
    losses = []
    for p in range(epoch_size):
        dtensor.to_device(d, e)
        ltensor.to_device(l, e)
        opt.step(net, e)
        if p + 1 != epoch_size:
            lsave = l.copy()
            reader.fill_train_batch(d, l, True)
        loss_tensor.to_host(loss, e)
        prob_tensor.to_host(prob, e)
        losses.append(loss[0])
        np.testing.assert_allclose(prob.sum(axis=1), 1, rtol=1e-5)
        assert lsave.shape == (batch,)
    assert np.all(np.isfinite(losses))

    # test(), then the snapshot and the deploy net
    net.mode = dp.PREDICT
    dtensor, ltensor = net.tensor('data'), net.tensor('label')
    prob_tensor = net.tensor('prob')
    predict = {}
    for dt, lbl in reader.test_data(batch):
        dtensor.to_device(dt, e)
        ltensor.to_device(lbl, e)
        net.forward(e)
        prob_tensor.to_host(prob[0:dt.shape[0]], e)
        predict[len(predict)] = (dt.copy(), prob.copy())
    net.save_parameters('snap_%d.dlp' % 0)
    make_resnet(batch, True, reader.img_size, reader.classes).save('net.json')

    deploy = dp.Net(ctx)
    deploy.mode = dp.PREDICT
    deploy.load_from_json_file('net.json')
    deploy.setup()
    deploy.load_parameters('snap_0.dlp', False)
    for dt, expected in predict.values():
        deploy.tensor('data').to_device(dt, e)
        deploy.forward(e, True)
        np.testing.assert_allclose(deploy.tensor('prob').to_host(), expected, rtol=1e-5, atol=1e-6)


# ----- tools/validate_onnx_imagenet.py: DLPrimModel against onnxruntime
class TinyClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)
        self.fc = torch.nn.Linear(6, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return torch.softmax(self.fc(x.mean(dim=(2, 3))), dim=1)


def export_torch_model(model, batch, path, opset=None):
    inp = torch.randn(batch, 3, SIDE, SIDE)
    model.eval()
    torch.onnx.export(model, inp, path, input_names=["data"], output_names=["prob"],
                      opset_version=opset, dynamic_axes=dict(data={0: 'batch'}, prob={0: 'batch'}),
                      dynamo=False)


class DLPrimModel(object):
    def __init__(self, onnx_path, device, max_batch):
        onnx_model = dp.ONNXModel()
        onnx_model.load(onnx_path)
        onnx_model.set_batch(max_batch)
        onnx_model.build()
        self.ctx = dp.Context(device)
        self.net = dp.Net(self.ctx)
        self.net.mode = dp.PREDICT
        with open(onnx_path.replace('.onnx', '.json'), 'w') as f:
            f.write(onnx_model.network)
            f.write('\n')
        self.net.load_model(onnx_model)
        self.net.save_parameters(onnx_path.replace('.onnx', '.dlp'))

    def eval(self, batch):
        data = self.net.tensor(self.net.input_names[0])
        data.reshape(dp.Shape(*batch.shape))
        self.net.reshape()
        prob = self.net.tensor(self.net.output_names[0])
        prob_cpu = np.zeros((prob.shape[0], prob.shape[1]), dtype=np.float32)
        q = self.ctx.make_execution_context(0)
        data.to_device(batch, q)
        self.net.forward(q)
        prob.to_host(prob_cpu, q)
        q.finish()
        return prob_cpu


def test_validate_onnx_imagenet(ctx, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    torch.manual_seed(0)
    model = TinyClassifier()
    with torch.no_grad():  # statistics that are not the identity, so BatchNorm matters
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    onnx_path = str(tmp_path / "tiny.onnx")
    export_torch_model(model, 4, onnx_path, 13)
    sess = ort.InferenceSession(onnx_path, providers=['CPUExecutionProvider'])
    m = DLPrimModel(onnx_path, ctx.device_string, 4)
    rng = np.random.default_rng(0)
    for n in (4, 3, 4):  # run_bm calls eval again; a smaller batch re-plans, then back
        batch = rng.standard_normal((n, 3, SIDE, SIDE)).astype(np.float32)
        ref = sess.run(None, {sess.get_inputs()[0].name: batch})[0]
        act = m.eval(batch)
        assert np.max(np.abs(ref - act)) < 1e-4
    # the files it wrote are a net and its weights
    net = dp.Net(ctx, mode=dp.PREDICT)
    net.load_from_json_file(onnx_path.replace('.onnx', '.json'))
    net.setup()
    net.load_parameters(onnx_path.replace('.onnx', '.dlp'))
    batch = rng.standard_normal((4, 3, SIDE, SIDE)).astype(np.float32)
    net.tensor('data').to_device(batch)
    net.forward(None, True)
    np.testing.assert_allclose(net.tensor('prob').to_host(),
                               sess.run(None, {'data': batch})[0], atol=1e-5)
